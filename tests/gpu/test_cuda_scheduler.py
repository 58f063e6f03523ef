"""The scheduler on a GPU rank: the rank computes on its GPU, and its profile measures the GPU."""

import nexus as nx
from nexus.scheduler.profile import measure_gemm_flops, rank_device


def test_a_gpu_rank_computes_on_its_gpu_and_profiles_its_gemm_rate():
    assert rank_device() == "cuda:0"  # local rank 0 of a single process
    assert measure_gemm_flops(device="cuda:0") > 5 * measure_gemm_flops()  # any GPU beats the host's cores
    g = nx.GraphBuilder(seed=0).input("x", nx.Shape(64, 64)).dense(32, "relu").dense(10, "softmax")
    s = nx.Scheduler.with_graph(g, nx.ClusterConfig.auto(), optimizer=nx.optim.Adam(lr=1e-3))
    report = s.train("digits", nx.Epochs(1), nx.BatchSize(64), verbose=False, max_steps=3)
    assert s.model.device == nx.device("cuda:0")
    assert report.plan.profiles[0].device == "gpu" and report.steps == 3
