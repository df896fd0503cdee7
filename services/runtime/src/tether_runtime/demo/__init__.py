"""The OpsPilot demo inventory: services, instances, errors and logs, kept in Postgres."""
