from django.contrib import admin

from .models import Order, Receipt


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["number", "email", "total", "created_at"]
    search_fields = ["number", "email"]


@admin.register(Receipt)
class ReceiptAdmin(admin.ModelAdmin):
    list_display = ["order", "email", "sent_at"]
    list_select_related = ["order"]
