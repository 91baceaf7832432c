#!/usr/bin/env bash
# Generate TPC-DS data, load it into Hive, run the queries through `harvest hive`, and collect job
# times, kills and the primary tenants' latency into /results.
#
#   run-tpcds.sh [QUERY...]        e.g. run-tpcds.sh 3 7 19 42 52 55 (default: $QUERIES or all 99)
#   SCALE=2 ROUNDS=1 ...           scale factor (GB) and how many times to run the list
set -euo pipefail
SHARED=/shared
SCALE="${SCALE:-2}"
ROUNDS="${ROUNDS:-1}"
DB="tpcds_text_${SCALE}"
URL="jdbc:hive2://hiveserver2:10000"
BENCH=/opt/testbench
RESULTS=/results
mkdir -p "$RESULTS/runs" /data/tpcds

if [ $# -gt 0 ]; then
  queries=("$@")
else
  read -r -a queries <<< "${QUERIES:-$(seq -s ' ' 1 99)}"
fi

# 1. Data: DuckDB's TPC-DS generator (dsdgen), '|'-separated text, one directory per table.
if ! hdfs dfs -test -e "/tmp/tpcds-generate/$SCALE/_SUCCESS"; then
  python3 - "$SCALE" /data/tpcds <<'PY'
import os, sys
import duckdb
scale, out = float(sys.argv[1]), sys.argv[2]
con = duckdb.connect()
con.execute("INSTALL tpcds; LOAD tpcds;")
con.execute(f"CALL dsdgen(sf={scale})")
for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema='main'").fetchall():
    os.makedirs(f"{out}/{table}", exist_ok=True)
    con.execute(f"COPY {table} TO '{out}/{table}/{table}.dat' (DELIMITER '|', HEADER false)")
    print("generated", table, file=sys.stderr)
PY
  hdfs dfs -mkdir -p "/tmp/tpcds-generate/$SCALE"
  hdfs dfs -put -f /data/tpcds/* "/tmp/tpcds-generate/$SCALE/"
  hdfs dfs -touchz "/tmp/tpcds-generate/$SCALE/_SUCCESS"
fi

# 2. Tables: hive-testbench's text DDL over the generated directories.
beeline -u "$URL" --hivevar DB="$DB" --hivevar LOCATION="/tmp/tpcds-generate/$SCALE" \
  -f "$BENCH/ddl-tpcds/text/alltables.sql"

# 3. Queries through the router, each run's decision and outcome kept as JSON.
start_s="$(date +%s)"
for round in $(seq 1 "$ROUNDS"); do
  for q in "${queries[@]}"; do
    sql="$BENCH/sample-queries-tpcds/query${q}.sql"
    [ -f "$sql" ] || { echo "no $sql, skipped" >&2; continue; }
    echo "=== round $round query $q" >&2
    harvest hive "$sql" --url "$URL/$DB" --name "tpcds-q$q" \
      --service http://placement:8470 --token-file "$SHARED/token" --classes "$SHARED/classes.json" \
      --history "$RESULTS/history.json" --result-json "$RESULTS/runs/r${round}-q${q}.json" \
      > "$RESULTS/runs/r${round}-q${q}.out" || echo "query $q failed (kept in its result file)" >&2
  done
done
end_s="$(date +%s)"

# 4. Kills as the agents count them (their /metrics), then one summary.
for i in 1 2 3; do
  curl -fs "http://worker$i:9464/metrics" > "$RESULTS/agent-metrics-worker$i.txt" || true
done
python3 /opt/testbed/scripts/summarize.py "$RESULTS" "$start_s" "$end_s"
