"""What the reports say of the client's own health and of the traffic's shape: the server's bursts
(``server_bursts``), each sending process's event-loop lateness, and each stage's arrival phase."""
