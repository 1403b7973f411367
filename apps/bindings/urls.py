app_name = "bindings"
urlpatterns: list = []
