"""Storage: what a topic store must do (`store`), the file level (`file_store` with its segments and dead-letter
files) and the memory level (`memory_store`). Knows nothing of the network, of ZooKeeper or of delivery."""
