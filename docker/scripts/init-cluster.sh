#!/usr/bin/env bash
# One-shot, after the NameNode and ResourceManager are up: HDFS directories, the Tez libraries,
# and the class labels (they must exist in the RM before NodeManagers report them).
set -euo pipefail
SHARED=/shared
until hdfs dfsadmin -safemode wait >/dev/null 2>&1; do sleep 3; done
hdfs dfs -mkdir -p /tmp /warehouse /apps/tez /user/root /tmp/tpcds-generate
hdfs dfs -chmod 1777 /tmp
hdfs dfs -chmod 777 /warehouse
hdfs dfs -test -e /apps/tez/tez.tar.gz || hdfs dfs -put /opt/tez/share/tez.tar.gz /apps/tez/tez.tar.gz
until yarn rmadmin -getGroups >/dev/null 2>&1; do sleep 3; done
yarn rmadmin -addToClusterNodeLabels "$(cat "$SHARED/labels.arg")" || true   # already there on a re-run
yarn rmadmin -refreshQueues
yarn cluster --list-node-labels
touch "$SHARED/init.done"
