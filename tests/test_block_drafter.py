"""No tests here: the block drafter's tests mirror its modules (test_block_kind.py, test_block_model.py,
test_block_drafting.py, test_ddtree.py, test_auto_budget_ddtree.py, test_block_rows.py) and its DFlash helpers live in
tests/_dflash.py. This name stays only while other test files import those helpers from it."""

from _dflash import BS, dflash_config, dflash_weights, qwen3_target, write_drafter

__all__ = ["BS", "dflash_config", "dflash_weights", "qwen3_target", "write_drafter"]
