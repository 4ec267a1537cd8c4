"""The context ladder and the verdict in the reports: the console's "verdict" section (printed first), its
ladder table, and the HTML report's opening section, decode-vs-context chart and SLO-met grid."""
