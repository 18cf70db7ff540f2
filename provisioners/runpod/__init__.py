"""RunPod: the GraphQL API through runpod-python."""
