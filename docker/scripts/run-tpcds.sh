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
RESULTS=/results
mkdir -p "$RESULTS/runs" /data/tpcds

if [ $# -gt 0 ]; then
  queries=("$@")
else
  read -r -a queries <<< "${QUERIES:-$(seq -s ' ' 1 99)}"
fi

# 1. Data, DDL and query text: DuckDB's TPC-DS generator (dsdgen), the module `harvest testbed run`
#    uses too ('|'-separated text, one directory per table; see scheduler_plugin/testbed/tpcds_data.py).
GEN=/data/tpcds
python3 -m scheduler_plugin.testbed.tpcds_data --scale "$SCALE" --out "$GEN" --hdfs-root "/tmp/tpcds-generate/$SCALE" >/dev/null
if ! hdfs dfs -test -e "/tmp/tpcds-generate/$SCALE/_SUCCESS"; then
  hdfs dfs -mkdir -p "/tmp/tpcds-generate/$SCALE"
  hdfs dfs -put -f "$GEN"/data/* "/tmp/tpcds-generate/$SCALE/"
  hdfs dfs -touchz "/tmp/tpcds-generate/$SCALE/_SUCCESS"
fi

# 2. Tables: external text tables over the generated directories.
beeline -u "$URL" -e "CREATE DATABASE IF NOT EXISTS $DB"
beeline -u "$URL/$DB" -f "$GEN/ddl.sql"

# 3. Queries through the router, each run's decision and outcome kept as JSON.
for round in $(seq 1 "$ROUNDS"); do
  for q in "${queries[@]}"; do
    sql="$GEN/queries/query${q}.sql"
    [ -f "$sql" ] || { echo "no $sql, skipped" >&2; continue; }
    echo "=== round $round query $q" >&2
    harvest hive "$sql" --url "$URL/$DB" --name "tpcds-q$q" \
      --service http://placement:8470 --token-file "$SHARED/token" --classes "$SHARED/classes.json" \
      --history "$RESULTS/history.json" --result-json "$RESULTS/runs/r${round}-q${q}.json" \
      > "$RESULTS/runs/r${round}-q${q}.out" || echo "query $q failed (kept in its result file)" >&2
  done
done

# 4. Kills as the agents count them (their /metrics), then one summary.
for i in 1 2 3; do
  curl -fs "http://worker$i:9464/metrics" > "$RESULTS/agent-metrics-worker$i.txt" || true
done
# The same report as `harvest testbed report` (scheduler_plugin/testbed/report.py).
python3 -m scheduler_plugin.testbed.report --hive-results "$RESULTS" --out "$RESULTS/report"
