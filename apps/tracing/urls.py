app_name = "tracing"
urlpatterns: list = []
