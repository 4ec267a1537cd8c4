"""Agent sessions in the reports: the console step table, the HTML step table and the TTFT-by-step charts."""
