"""Health, the admin API (purge, event webhook); metrics and the dashboard join it later."""
