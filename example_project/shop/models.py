from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=32, unique=True)
    email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["number"]

    def __str__(self) -> str:
        return self.number


class Receipt(models.Model):
    """One per order: the receipt task may run twice, the receipt exists once."""

    order = models.OneToOneField(Order, on_delete=models.CASCADE, related_name="receipt")
    email = models.EmailField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at"]

    def __str__(self) -> str:
        return f"receipt for {self.order}"
