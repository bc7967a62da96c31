"""`tf_sdca.keras.LinearModel.fit` across processes: CoCoA+ rounds.

Under a multi-worker `tf.distribute.MultiWorkerMirroredStrategy`, `fit`
does not run Keras' loop: each worker trains its in-memory rows as its
fixed shard of `tf_sdca.distributed.train`, and every worker ends with the
same weights (g3doc/distributed.md).
"""
import keras
import numpy as np
import tensorflow as tf


def strategy_workers(strategy):
  """`strategy` (the model's: the scope it was built in, else the current
  one, as Keras trains) when it spans several worker processes (a
  `MultiWorkerMirroredStrategy` on a cluster), None for the default
  strategy or a one-replica one.

  Raises:
    ValueError: a strategy with several replicas in this process (e.g.
      `MirroredStrategy` over several devices): Keras would run the whole
      SDCA epoch once per replica on the same rows and mix their writes,
      which is not SDCA; threads (`num_threads`) are how one process
      trains in parallel. Or a cluster with parameter servers: Keras 3's
      fit has no parameter-server loop.
  """
  resolver = getattr(strategy, "cluster_resolver", None)
  spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
  workers = len(spec.get("chief", [])) + len(spec.get("worker", []))
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and \
      workers > 1 and not spec.get("ps"):
    local = strategy.num_replicas_in_sync // workers
    if local > 1:
      raise ValueError(
          f"LinearModel.fit under MultiWorkerMirroredStrategy with {local} "
          "replicas per worker: give each worker process one device (CoCoA+ "
          "has one shard per process)")
    return strategy
  if spec.get("ps"):
    raise ValueError(
        f"LinearModel.fit under {type(strategy).__name__} with parameter "
        f"servers {spec['ps']}: Keras 3's fit has no parameter-server "
        "loop, and tf_sdca trains across processes with CoCoA+ on a "
        "multi-worker MultiWorkerMirroredStrategy (g3doc/distributed.md)")
  if strategy.num_replicas_in_sync > 1:
    raise ValueError(
        f"LinearModel.fit under {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replicas: Keras would run each "
        "SDCA epoch once per replica on the same rows and mix their "
        "writes, which is not SDCA. Train without the strategy (threads: "
        "num_threads), or across processes under a multi-worker "
        "MultiWorkerMirroredStrategy (CoCoA+, g3doc/distributed.md)")
  return None


def train(strategy, arrays, epochs, tol, verbose, rows_error=None,
          num_features=None, **options):
  """CoCoA+ rounds over this worker's rows and the other workers'.

  Args:
    strategy: the multi-worker strategy (see `strategy_workers`).
    arrays: this worker's validated rows `(csr or None, dense, labels,
      weights, num_sparse)`, the columns in the weight table's order; None
      when they raised `rows_error` (the others are told, and it is raised).
    num_features: the sparse slots' width where `arrays` is None (else
      theirs), as the other workers have it.
    epochs: the most rounds (a round is one pass over every shard).
    tol: stop below this relative duality gap (None: never).
    verbose: print the rounds.
    **options: `tf_sdca.distributed.train`'s loss options (`loss`, `l1`,
      `l2`, `gamma`, `seed`, `num_classes`, `hinge_step`).

  Returns:
    `tf_sdca.distributed.train`'s result.
  """
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  csr, dense, labels, weights, num_sparse = (
      arrays if arrays is not None else (None,) * 4 + (num_features,))
  indptr, indices, values = csr if csr is not None else (None,) * 3
  return training.train(
      labels, dense=dense, indptr=indptr, indices=indices, values=values,
      example_weights=weights, num_features=num_sparse, max_rounds=epochs,
      tol=tol, verbose=1 if verbose else 0,
      cluster=cluster_lib.Cluster.from_strategy(strategy),
      rows_error=rows_error, **options)


def weight_table(result):
  """The float64 weight table (row-major `[slots, K]`; K = 1: the vectors
  themselves) of a `train` result."""
  return tf.constant(np.concatenate([result.sparse_weights.reshape(-1),
                                     result.dense_weights.reshape(-1)]))


def history(model, result):
  """A `keras.callbacks.History` of `model` with the rounds of a `train`
  result: epochs, `loss` and `duality_gap`."""
  out = keras.callbacks.History()
  out.set_model(model)
  out.epoch = [h["round"] - 1 for h in result.history]
  out.history = {"loss": [h["loss"] for h in result.history],
                 "duality_gap": [h["duality_gap"] for h in result.history]}
  return out


def check_fit(x, y, validation_data, validation_split, callbacks,
              initial_epoch, steps_per_epoch):
  """ValueError for `fit` arguments a multi-worker fit does not take: it
  trains this worker's in-memory `x` and `y` (not a dataset) as CoCoA+
  rounds, without validation, callbacks or a partial epoch."""
  if isinstance(x, tf.data.Dataset) or validation_data is not None or \
      validation_split or callbacks or initial_epoch or steps_per_epoch:
    raise ValueError(
        "fit under a multi-worker MultiWorkerMirroredStrategy trains "
        "CoCoA+ rounds across the workers on each worker's in-memory "
        "rows: pass this worker's x and y (not a dataset), without "
        "validation data, callbacks, initial_epoch or steps_per_epoch")
  if y is None:
    raise ValueError("fit needs labels y")
