"""The read-only SQL tool: the statement check, the worker process that runs it, and the rows it returns."""
