"""Grading past one machine, on schedulers that already exist: each runs the same shards
(`grade-class --shard K/N`, one output folder each) and then one `merge` (autograder.classrun.publish)."""
