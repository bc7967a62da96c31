"""Output averaging (the reference's SDCA with averaging) shared by the
doors: the option's check and the running mean of iterates.

`tf_sdca.trainer.InMemorySdca(average_from=T0)` averages its epochs'
iterates; `tf_sdca.keras.LinearModel`, `tf-sdca train --average-from`, the
estimators and `SdcaModel` take the same option (g3doc/trainer.md).
"""
import numbers

import numpy as np


def check_average_from(value, unit="epoch"):
  """`value` as an int T0 >= 0, or None.

  Args:
    value: the `average_from` option.
    unit: what T0 counts ("epoch", "step", "minimize call"), for the
      message.

  Raises:
    ValueError: for a bool, a non-integer or a negative value, naming
      `average_from` and the value.
  """
  if value is None:
    return None
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
      value < 0):
    raise ValueError(f"average_from must be None or a {unit} count >= 0, "
                     f"got {value!r}")
  return int(value)


class RunningMean:
  """The float64 running mean of a list of arrays (an iterate's parts),
  updated as `mean += (x - mean) / count` (no sum that grows with the
  count)."""

  def __init__(self, count=0, parts=None):
    self.count = int(count)
    self.parts = (None if parts is None else
                  [np.array(p, np.float64) for p in parts])

  def add(self, parts):
    """Adds one iterate (arrays of the same shapes every time)."""
    parts = [np.array(p, np.float64) for p in parts]
    self.count += 1
    if self.count == 1 or self.parts is None:
      self.parts = parts
      self.count = 1
    else:
      for mean, part in zip(self.parts, parts):
        mean += (part - mean) / self.count
