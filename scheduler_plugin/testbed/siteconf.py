"""The ``*-site.xml`` files of a test cluster, one conf folder per host.

``site_files(plan, host)`` gives ``{file name: {key: value}}`` for one host ("master", "client" or a
worker), the defaults below merged with the caller's overrides (``--set FILE:KEY=VALUE``), in which
``{dir}``, ``{host}``, ``{ip}`` and ``{lib}`` are replaced per host.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from scheduler_plugin.testbed.cluster import HostPlan, Plan

SITE_FILES = ("core-site", "hdfs-site", "yarn-site", "mapred-site", "capacity-scheduler")

# yarn.resourcemanager.<key> -> the key of its port in Plan.master_ports.
RM_PORT_KEYS = {"address": "rm", "scheduler.address": "rm_scheduler", "resource-tracker.address": "rm_tracker",
                "admin.address": "rm_admin", "webapp.address": "rm_http"}

CAPACITY_SCHEDULER = {
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": "100",
    "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
    "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
    "yarn.scheduler.capacity.resource-calculator": "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator",
}


def _user() -> str:
    import getpass

    return getpass.getuser()


def render(props: Mapping[str, str]) -> str:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<!-- written by harvest hadoop up -->", "<configuration>"]
    for key in sorted(props):
        lines.append(f"  <property><name>{escape(key)}</name><value>{escape(props[key])}</value></property>")
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"


def _mr_opts(heap_mb: int, opens: str) -> str:
    return f"-Xmx{heap_mb}m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 {opens}"


def site_files(plan: Plan, host: HostPlan) -> dict[str, dict[str, str]]:
    """Every site file of ``host``: the defaults, then ``plan.overrides`` (placeholders expanded)."""
    from scheduler_plugin.testbed.versions import jvm_open_flags

    d = plan.dir
    master = plan.network.master_ip
    opens = " ".join(jvm_open_flags())
    lib = str(plan.layout.lib)
    data = Path(d) / "hosts" / host.name / "data"
    ports = plan.master_ports
    nn_rpc = f"{master}:{ports['namenode']}"
    files: dict[str, dict[str, str]] = {name: {} for name in SITE_FILES}
    files["core-site"].update({
        "fs.defaultFS": f"hdfs://{nn_rpc}",
        "hadoop.tmp.dir": str(data / "tmp"),
        "hadoop.security.authentication": "simple",
        "hadoop.http.staticuser.user": "root",
        "ipc.client.connect.max.retries": "30",
        "ipc.client.connect.retry.interval": "500",
        # HiveServer2's embedded metastore acts for the session's user (even without doAs).
        f"hadoop.proxyuser.{_user()}.hosts": "*",
        f"hadoop.proxyuser.{_user()}.groups": "*",
    })
    files["hdfs-site"].update({
        "dfs.namenode.rpc-address": nn_rpc,
        "dfs.namenode.http-address": f"{master}:{ports['namenode_http']}",
        "dfs.namenode.name.dir": str(Path(d) / "hosts" / "master" / "data" / "name"),
        "dfs.permissions.enabled": "false",
        "dfs.replication": str(min(3, max(1, plan.datanodes))),
        "dfs.namenode.safemode.extension": "0",
        "dfs.namenode.safemode.min.datanodes": "0",
        "dfs.heartbeat.interval": "1",
        "dfs.namenode.heartbeat.recheck-interval": "5000",  # dead after 2 x 5 s + 10 heartbeats: 20 s
        "dfs.namenode.redundancy.interval.seconds": "1",
        "dfs.namenode.decommission.interval": "2",
        "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.datanode.data.dir": str(data / "dn"),
        "dfs.datanode.du.reserved": "0",
        "dfs.blocksize": "1048576",
        "dfs.namenode.fs-limits.min-block-size": "1024",
        "dfs.webhdfs.enabled": "true",
    })
    if host.datanode:
        p = host.ports
        files["hdfs-site"].update({
            "dfs.datanode.hostname": host.ip,
            "dfs.datanode.address": f"{host.ip}:{p['datanode']}",
            "dfs.datanode.http.address": f"{host.ip}:{p['datanode_http']}",
            "dfs.datanode.ipc.address": f"{host.ip}:{p['datanode_ipc']}",
        })
    rm = {f"yarn.resourcemanager.{key}": f"{master}:{ports[name]}" for key, name in RM_PORT_KEYS.items()}
    files["yarn-site"].update(rm)
    files["yarn-site"].update({
        "yarn.resourcemanager.hostname": master,
        "yarn.resourcemanager.scheduler.class":
            "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler",
        "yarn.resourcemanager.recovery.enabled": "false",
        "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "500",
        "yarn.node-labels.enabled": "true",
        "yarn.node-labels.configuration-type": "distributed",
        "yarn.node-labels.fs-store.root-dir": "file://" + str(Path(d) / "hosts" / "master" / "data" / "node-labels"),
        "yarn.scheduler.minimum-allocation-mb": "128",
        "yarn.scheduler.maximum-allocation-mb": "2048",
        "yarn.nodemanager.resource.memory-mb": "2048",
        "yarn.nodemanager.resource.cpu-vcores": "4",
        "yarn.nodemanager.vmem-check-enabled": "false",
        "yarn.nodemanager.pmem-check-enabled": "false",
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
        "yarn.nodemanager.aux-services": "mapreduce_shuffle",
        "yarn.nodemanager.aux-services.mapreduce_shuffle.class": "org.apache.hadoop.mapred.ShuffleHandler",
        "yarn.nodemanager.delete.debug-delay-sec": "600",
        "yarn.nodemanager.env-whitelist":
            "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,CLASSPATH_PREPEND_DISTCACHE,"
            "HADOOP_YARN_HOME,HADOOP_HOME,PATH,LANG,TZ,HADOOP_MAPRED_HOME",
        "yarn.application.classpath": f"{lib}/*",
        "yarn.log-aggregation-enable": "false",
    })
    if host.nodemanager:
        p = host.ports
        files["yarn-site"].update({
            "yarn.nodemanager.hostname": host.ip,
            "yarn.nodemanager.address": f"{host.ip}:{p['nodemanager']}",
            "yarn.nodemanager.webapp.address": f"{host.ip}:{p['nodemanager_http']}",
            "yarn.nodemanager.localizer.address": f"{host.ip}:{p['nodemanager_localizer']}",
            "mapreduce.shuffle.port": str(p["shuffle"]),
            "yarn.nodemanager.local-dirs": str(data / "nm-local"),
            "yarn.nodemanager.log-dirs": str(Path(d) / "hosts" / host.name / "logs" / "containers"),
        })
    files["mapred-site"].update({
        "mapreduce.framework.name": "yarn",
        "mapreduce.application.classpath": f"{lib}/*",
        "yarn.app.mapreduce.am.resource.mb": "512",
        "yarn.app.mapreduce.am.command-opts": _mr_opts(320, opens),
        "yarn.app.mapreduce.am.admin-command-opts": "",
        "mapreduce.map.memory.mb": "384",
        "mapreduce.reduce.memory.mb": "384",
        "mapreduce.map.java.opts": _mr_opts(256, opens),
        "mapreduce.reduce.java.opts": _mr_opts(256, opens),
        "mapreduce.task.io.sort.mb": "32",
        "mapreduce.admin.map.child.java.opts": "",
        "mapreduce.admin.reduce.child.java.opts": "",
        "yarn.app.mapreduce.am.staging-dir": "/tmp/hadoop-yarn/staging",
        "mapreduce.job.ubertask.enable": "false",
        # A small cluster's waits: the AM asks the RM every 0.3 s (default 1 s) and the job client
        # polls every 0.3 s (defaults 1 s for progress, 5 s for completion).
        "yarn.app.mapreduce.am.scheduler.heartbeat.interval-ms": "300",
        "mapreduce.client.progressmonitor.pollinterval": "300",
        "mapreduce.client.completion.pollinterval": "300",
        "mapreduce.shuffle.port": str(host.ports.get("shuffle", 13562)),
    })
    files["capacity-scheduler"].update(CAPACITY_SCHEDULER)
    subst = {"dir": str(d), "host": host.name, "ip": host.ip, "lib": lib}
    for (file, key), value in plan.overrides.items():
        files.setdefault(file, {})[key] = value.format(**subst)
    return files
