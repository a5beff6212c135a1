"""PostgreSQL: every insert into `events` NOTIFYs genbot_events_<schema>, so a service
hears what workers on other hosts write the moment they commit (storage.wakeup.EventBell).
SQLite has no NOTIFY; its readers poll."""

from tortoise import migrations
from tortoise.migrations import operations as ops

POSTGRES = [
    """CREATE FUNCTION genbot_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         PERFORM pg_notify(left('genbot_events_' || current_schema(), 63), '');
         RETURN NULL;
       END $$""",
    """CREATE TRIGGER events_notify AFTER INSERT ON events
       FOR EACH STATEMENT EXECUTE FUNCTION genbot_events_notify()""",
]


async def create_trigger(apps, schema_editor) -> None:
    if schema_editor.DIALECT != "sqlite":
        for statement in POSTGRES:
            await schema_editor.client.execute_query(statement)


class Migration(migrations.Migration):
    dependencies = [("storage", "0008_workers")]

    operations = [ops.RunPython(create_trigger)]
