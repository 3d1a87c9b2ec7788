"""Table formats for `gateway load --table`: which files a table's current state is made of
(Iceberg, Delta), Hive-style partition filters, and the footer bytes engines read first. Pure:
the bytes come from the caller (gateway.admin.tableplan reads them through the engine)."""
