"""The broker's HTTP side: `/metrics`, `/healthz`, `/stats`, `/deadletters` (`http`) and the admin API
(`api`, `migration`, with the checks they share in `common`). Reads the node through `common.NodeView`."""
