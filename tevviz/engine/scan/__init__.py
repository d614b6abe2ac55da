"""Runs over many prompts: scans (files, merge, the run) and the drafter doctor."""
