"""Run artifacts shared by training and evaluation: checkpoints, exports, records, trackers, plots."""
