"""The SQL storage on SQLAlchemy 2.x (S4): SQLite (aiosqlite) and PostgreSQL (asyncpg)."""
