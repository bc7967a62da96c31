"""Keras front end of tf_sdca: `LinearModel`, a linear model trained by SDCA."""
from tf_sdca.keras.data import InvalidInputError
from tf_sdca.keras.linear_model import LinearModel
