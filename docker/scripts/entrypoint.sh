#!/usr/bin/env bash
# Testbed entrypoint: one image, one role per container (the compose command).
#   setup | namenode | resourcemanager | init | worker | hiveserver2 | placement | tpcds
set -euo pipefail

role="${1:-}"
shift || true
SHARED=/shared
CONF="$SHARED/conf"
log() { echo "[$(date -u +%H:%M:%S) $role] $*" >&2; }

wait_for() { # wait_for HOST PORT [SECONDS]
  local host="$1" port="$2" deadline=$((SECONDS + ${3:-300}))
  until nc -z "$host" "$port" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then log "timed out waiting for $host:$port"; exit 1; fi
    sleep 2
  done
}

case "$role" in
  setup)
    exec /opt/testbed/scripts/setup.sh
    ;;
  namenode)
    if [ ! -d /hadoop/dfs/name/current ]; then
      log "formatting HDFS"
      hdfs namenode -format -nonInteractive -force testbed
    fi
    exec hdfs namenode
    ;;
  resourcemanager)
    exec yarn resourcemanager
    ;;
  init)
    exec /opt/testbed/scripts/init-cluster.sh
    ;;
  worker)
    exec /opt/testbed/scripts/worker.sh
    ;;
  hiveserver2)
    export HADOOP_CLASSPATH="$TEZ_CONF_DIR:$TEZ_HOME/*:$TEZ_HOME/lib/*"   # Tez client for Hive only
    if [ ! -d /var/lib/hive/metastore_db ]; then
      log "initialising the embedded Derby metastore"
      (cd /var/lib/hive && schematool -dbType derby -initSchema)
    fi
    cd /var/lib/hive
    exec hiveserver2 --hiveconf hive.root.logger=INFO,console
    ;;
  placement)
    # Re-clustering rewrites the queues in the shared conf dir; the RM loads them on -refreshQueues.
    exec harvest -v serve --host 0.0.0.0 --http-port 8470 --grpc-port 8471 --data-dir /var/lib/harvest \
      --token-file "$SHARED/token" --classes-file "$SHARED/classes.json" \
      --inventory-file "$SHARED/service-inventory.csv" --reimages-file "$SHARED/traces/reimages.parquet" \
      --rm-url http://resourcemanager:8088 --rm-admin-user yarn \
      --capacity-scheduler-file "$CONF/capacity-scheduler.xml" \
      --refresh-queues-command "yarn rmadmin -refreshQueues"
    ;;
  tpcds)
    export HADOOP_CLASSPATH="$TEZ_CONF_DIR:$TEZ_HOME/*:$TEZ_HOME/lib/*"
    wait_for hiveserver2 10000 900
    exec /opt/testbed/scripts/run-tpcds.sh "$@"
    ;;
  *)
    echo "usage: entrypoint.sh setup|namenode|resourcemanager|init|worker|hiveserver2|placement|tpcds" >&2
    exit 2
    ;;
esac
