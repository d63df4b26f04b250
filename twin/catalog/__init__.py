"""Model catalog: HuggingFace configs, architecture description and the tensor inventory."""

from twin.catalog.config import ModelConfig, parse_config
from twin.catalog.inventory import Inventory, ShardRule, TensorSpec, build_inventory
from twin.catalog.registry import catalog_names, load_model

__all__ = [
    "Inventory",
    "ModelConfig",
    "ShardRule",
    "TensorSpec",
    "build_inventory",
    "catalog_names",
    "load_model",
    "parse_config",
]
