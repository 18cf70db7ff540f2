"""The store: SQLModel tables, database setup and migrations, queries. Never imports benchctl."""
