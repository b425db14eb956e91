"""What an eval leaves on disk and on screen: episode records (JSONL), the run
directory, the summary tables and the progress display."""
