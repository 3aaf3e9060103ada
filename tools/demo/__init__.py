"""Helpers of ``braid demo`` (tools/cmd_demo.py): orchestration and report."""
