"""The simulated fleet (``provider: sim``): a fabric model behind the two backend protocols.

It judges the manifests it is given as a real cluster would (placement, gang admission, the
RDMA plumbing, ``NCCL_NET``) and writes what the real programs print (nccl-tests, NCCL INFO
logs, fio JSON). State lives in a SQLite file because every Airflow task is its own process.
"""
