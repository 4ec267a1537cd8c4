"""What to send: profiles, prompt building, load shapes and sweep planning."""
