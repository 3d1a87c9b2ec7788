"""What the worker processes of one node share: who they are (workers.WorkerSet) and the
invalidations they tell each other (journal)."""
