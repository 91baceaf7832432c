#!/usr/bin/env bash
# A worker node: DataNode + NodeManager (secondary tenant), the harvest agent, and the primary
# tenant's load generator. The container stops when any of the four stops.
set -euo pipefail
SHARED=/shared
index="${WORKER_INDEX:?WORKER_INDEX is required}"
until [ -f "$SHARED/init.done" ]; do sleep 3; done
# shellcheck disable=SC1091
. "$SHARED/workers.env"
tenant_var="WORKER${index}_TENANT"
tenant="${!tenant_var}"
host="$(hostname)"
mkdir -p /var/lib/harvest-agent /results

hdfs datanode &
yarn nodemanager &
# The agent measures this container only (its cgroup, mounted at /sys/fs/cgroup with a private
# cgroup namespace): psutil's /proc/stat and /proc/meminfo would be the host's, and every other
# container's load would count as this worker's primary tenant.
harvest -v agent --mode yarn --interval-s 1 --state-dir /var/lib/harvest-agent --cgroup /sys/fs/cgroup \
  --service placement:8471 --token-file "$SHARED/token" --tenant "$tenant" --node "$host" \
  --capacity-cores "${WORKER_CORES:-4}" --capacity-memory-mb "${WORKER_MEMORY_MB:-6144}" \
  --reserve-cores 1 --reserve-memory-mb 1024 \
  --rm-url http://resourcemanager:8088 --nm-url http://localhost:8042 --yarn-bin /opt/hadoop/bin/yarn \
  --storage-path /hadoop/dfs/data --metrics-port 9464 --metrics-host 0.0.0.0 &
python3 -m scheduler_plugin.testbed.primary --utilization "$SHARED/traces/utilization.parquet" \
  --tenant "$tenant" --cores "${WORKER_CORES:-4}" --speedup "${REPLAY_SPEEDUP:-30}" \
  --latency-out "/results/primary-latency-$host.csv" &
wait -n
echo "worker $host: a process exited, stopping" >&2
exit 1
