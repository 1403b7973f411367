"""The cluster as ZooKeeper holds it: this broker's view of the layout (`state`), its membership and watches
(`membership`), binding selectors (`selector`), the ACLs of each path (`zk_acl`), and direct provisioning for
tests and benches (`provision`)."""
