import cProfile, pstats, sys, time, uuid
from datetime import UTC, datetime, timedelta
from mnemos.config import Settings
from mnemos.domain import accounts
from mnemos.storage import migrate, open_store
from tests.world import World, agent_memory
url, n = sys.argv[1], int(sys.argv[2])
settings = Settings(database_url=url, rate_limit_per_minute=0, embedder="none")
migrate(settings); store = open_store(settings); world = World(store)
tag = str(time.time_ns())
ann = world.user(f"Ann{tag}", f"o{tag}"); bot = world.agent(ann)
start = datetime.now(UTC) - timedelta(days=1)
for first in range(0, n, 5000):
    rows = [agent_memory(bot, f"private note {i}", start + timedelta(milliseconds=i), id=uuid.uuid4()) for i in range(first, min(n, first + 5000))]
    store.replace_memories(bot.tenant, rows, [], datetime.now(UTC))
import sqlalchemy as sa
if "postgres" in url:
    with store._write() as c: c.exec_driver_sql("ANALYZE memories")
p = cProfile.Profile(); t = time.perf_counter(); p.enable()
accounts.delete_owned_agent(store, uuid.UUID(ann.id), uuid.UUID(bot.id))
p.disable(); print("took", time.perf_counter() - t)
pstats.Stats(p).sort_stats("cumulative").print_stats(25)
