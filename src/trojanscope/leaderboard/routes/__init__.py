"""One router per resource: rounds, teams, submissions (JSON API) and pages (HTML)."""
