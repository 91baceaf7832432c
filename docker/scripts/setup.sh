#!/usr/bin/env bash
# One-shot, before any daemon: configuration, token, the primary tenants' history, classes, queues.
# Everything lands on the shared volume; re-running keeps what exists.
set -euo pipefail
SHARED=/shared
CONF="$SHARED/conf"
WORKERS="${WORKERS:-3}"
mkdir -p "$CONF" "$SHARED/traces" /results

if [ ! -f "$CONF/.populated" ]; then
  cp -r /opt/hadoop/etc/hadoop/. "$CONF/"
  cp /opt/hive/conf/hive-log4j2.properties.template "$CONF/hive-log4j2.properties" 2>/dev/null || true
  cp /opt/testbed/conf/*.xml "$CONF/"
  touch "$CONF/.populated"
fi

[ -s "$SHARED/token" ] || python3 -c 'import secrets; print(secrets.token_hex(24))' > "$SHARED/token"
chmod 0644 "$SHARED/token"   # testbed only: every container reads it

# 1. History of a synthetic datacenter (primary tenants' CPU, reimages, inventory) and its classes.
if [ ! -s "$SHARED/classes.json" ]; then
  harvest generate --servers "${HISTORY_SERVERS:-60}" --days "${HISTORY_DAYS:-14}" --seed "${SEED:-7}" \
    --out "$SHARED/traces"
  harvest cluster --utilization "$SHARED/traces/utilization.parquet" --reimages "$SHARED/traces/reimages.parquet" \
    --inventory "$SHARED/traces/inventory.parquet" --out "$SHARED/classes.json"
fi

# 2. Which tenant each worker stands in for: classes taken pattern by pattern in turn (periodic,
#    constant, unpredictable, periodic, ...), the first tenant of each, round robin over the workers;
#    the same choice `harvest testbed up` makes (scheduler_plugin/testbed/testbed.py, choose_tenants).
python3 - "$SHARED/classes.json" "$WORKERS" > "$SHARED/workers.env" <<'PY'
import json, sys
from scheduler_plugin.testbed.testbed import choose_tenants
for i, tenant in enumerate(choose_tenants(json.load(open(sys.argv[1])), int(sys.argv[2])), start=1):
    print(f"WORKER{i}_TENANT={tenant}")
PY

# 3. Racks of the testbed (two racks) for the topology script.
{
  echo "server,tenant,rack"
  for i in $(seq 1 "$WORKERS"); do echo "worker$i,t,rack$(( (i - 1) % 2 + 1 ))"; done
} > "$SHARED/testbed-inventory.csv"
harvest topology-map --inventory "$SHARED/testbed-inventory.csv" --out "$SHARED/topology.map"

# 4. The placement service's inventory: the synthetic history's servers (their reimage events give
#    the reimage rates) plus the testbed's workers, each in its tenant's environment, on its rack.
python3 - "$SHARED/traces/inventory.parquet" "$SHARED/workers.env" "$WORKERS" "${WORKER_CORES:-4}" \
  "${WORKER_MEMORY_MB:-6144}" > "$SHARED/service-inventory.csv" <<'PY'
import csv, sys
import pyarrow.parquet as pq
rows = pq.read_table(sys.argv[1]).to_pylist()
tenants = dict(line.strip().split("=", 1) for line in open(sys.argv[2]) if "=" in line)
env_of = {r["tenant"]: r["environment"] for r in rows}
out = csv.writer(sys.stdout)
out.writerow(["server", "tenant", "environment", "rack", "cores", "memory_mb", "storage_gb"])
for r in rows:
    out.writerow([r["server"], r["tenant"], r["environment"], r["rack"], r["cores"], r["memory_mb"], r["storage_gb"]])
for i in range(1, int(sys.argv[3]) + 1):
    tenant = tenants[f"WORKER{i}_TENANT"]
    out.writerow([f"worker{i}", tenant, env_of.get(tenant, tenant), f"rack{(i - 1) % 2 + 1}", sys.argv[4], sys.argv[5], 100])
PY

# 5. One queue and one node label per class.
harvest capacity-scheduler --classes "$SHARED/classes.json" --out "$CONF/capacity-scheduler.xml" 2> "$SHARED/labels.cmd"
python3 -c 'import json,sys; print(",".join(c["id"] + "(exclusive=false)" for c in json.load(open(sys.argv[1]))["classes"]))' \
  "$SHARED/classes.json" > "$SHARED/labels.arg"
echo "setup done: $(wc -l < "$SHARED/workers.env") workers, labels $(cat "$SHARED/labels.arg")"
