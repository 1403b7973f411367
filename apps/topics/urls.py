app_name = "topics"
urlpatterns: list = []
