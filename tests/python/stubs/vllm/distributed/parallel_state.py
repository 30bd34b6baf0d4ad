"""Stand-in: the tensor-parallel rank, set by the tests per worker."""
RANK = 0


def get_tensor_model_parallel_rank():
    return RANK
