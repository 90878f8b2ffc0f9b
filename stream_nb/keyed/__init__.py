"""Keyed state: each key's counts in a store of the partitions a worker owns, and their changelog."""
