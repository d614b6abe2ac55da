"""The mathematics of one round on tensors: trees, tree attention masks and KV commits, sampling, the exit law,
scoring and the optimal tree."""
