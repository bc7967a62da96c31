"""Training across processes: CoCoA+ rounds on TensorFlow's distributed
runtime (g3doc/distributed.md).

  - `shard`: one worker's rows packed once, its duals and its local solve;
  - `simulation`: K shards in one process, for rounds and bytes at any K.
"""
