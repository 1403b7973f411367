from django import forms

from apps.clusters.actions import EDITABLE_FIELDS
from apps.clusters.models import Cluster


class ClusterForm(forms.ModelForm):
    class Meta:
        model = Cluster
        fields = list(EDITABLE_FIELDS)
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}
        help_texts = {
            "zk_connect": "host:port pairs separated by commas, e.g. zk1:2181,zk2:2181",
            "zk_chroot": "The cluster's root in ZooKeeper, e.g. /switchyard/prod-a",
        }
