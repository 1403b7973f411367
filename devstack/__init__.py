"""Local stack management: the services behind `./dev up`, `./dev test` and `./dev down`."""
