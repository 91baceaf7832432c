"""Client commands (``D/bin/hdfs``, ``yarn``, ``hadoop``, ``mapred``) for a test cluster."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from scheduler_plugin.testbed.versions import java_home, jvm_open_flags

if TYPE_CHECKING:
    from scheduler_plugin.testbed.cluster import Plan

CLIENT_COMMANDS = {
    "hdfs": {"dfs": "org.apache.hadoop.fs.FsShell", "dfsadmin": "org.apache.hadoop.hdfs.tools.DFSAdmin",
             "fsck": "org.apache.hadoop.hdfs.tools.DFSck", "getconf": "org.apache.hadoop.hdfs.tools.GetConf"},
    "yarn": {"rmadmin": "org.apache.hadoop.yarn.client.cli.RMAdminCLI", "node": "org.apache.hadoop.yarn.client.cli.NodeCLI",
             "application": "org.apache.hadoop.yarn.client.cli.ApplicationCLI!",
             "applicationattempt": "org.apache.hadoop.yarn.client.cli.ApplicationCLI!",
             "container": "org.apache.hadoop.yarn.client.cli.ApplicationCLI!",
             "cluster": "org.apache.hadoop.yarn.client.cli.ClusterCLI", "jar": "org.apache.hadoop.util.RunJar"},
    # sleep: MapReduce's sleep job (the jobclient tests jar is in lib/, so on every task's class path too).
    "hadoop": {"fs": "org.apache.hadoop.fs.FsShell", "jar": "org.apache.hadoop.util.RunJar",
               "sleep": "org.apache.hadoop.mapreduce.SleepJob"},
    "mapred": {"job": "org.apache.hadoop.mapred.JobClient", "jar": "org.apache.hadoop.util.RunJar"},
}


def client_script(plan: Plan, command: str) -> str:
    conf = plan.dir / "conf" / "client"
    cp = ":".join([str(conf), f"{plan.layout.lib}/*"])
    opts = " ".join(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
                     f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}", *jvm_open_flags()])
    cases = []
    for sub, cls in CLIENT_COMMANDS[command].items():
        keep = cls.endswith("!")  # the class takes the sub-command as its first argument
        cases.append(f"  {sub}) cls={cls.rstrip('!')}; {'' if keep else 'shift; '};;")
    return f"""#!/bin/sh
# {command} for the cluster in {plan.dir} (Hadoop {plan.version}), written by harvest hadoop up.
export HADOOP_CONF_DIR={shlex.quote(str(conf))} JAVA_HOME={shlex.quote(java_home())}
case "$1" in
{chr(10).join(cases)}
  *) echo "{command}: sub-commands: {' '.join(CLIENT_COMMANDS[command])}" >&2; exit 2 ;;
esac
exec java {opts} -cp {shlex.quote(cp)} "$cls" "$@"
"""
