from django_jobs import task


@task()
def ping() -> str:
    return "pong"
