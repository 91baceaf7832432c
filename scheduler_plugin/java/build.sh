#!/usr/bin/env bash
# Build (or test) the HDFS block-placement shim.
#
#   build.sh [--classpath CP] [--out DIR]
#       Compile src/main/java with javac --release 8 against the Hadoop jars and write
#       DIR/harvest-hdfs-shim.jar (default DIR: ./build). CP defaults to "$(hadoop classpath)";
#       on a machine without the hadoop command, pass the NameNode's jars, e.g.
#       --classpath "/opt/hadoop/share/hadoop/hdfs/*:/opt/hadoop/share/hadoop/common/*:/opt/hadoop/share/hadoop/common/lib/*"
#   build.sh --test [--out DIR] [-- TEST-ARGS...]
#       Compile src/main/java together with the Hadoop stubs and tests under src/test/java (no
#       Hadoop needed) and run org.harvest.hdfs.ShimTests TEST-ARGS.
#   build.sh --compile-tests [--out DIR]
#       The same compilation without running; then: java -cp DIR/classes org.harvest.hdfs.ShimTests ...
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/build"
classpath=""
mode="jar"
test_args=()

while [ $# -gt 0 ]; do
  case "$1" in
    --classpath) classpath="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --test) mode="test"; shift ;;
    --compile-tests) mode="compile-tests"; shift ;;
    --) shift; test_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$out/classes"
mapfile -t main_sources < <(find "$here/src/main/java" -name '*.java' | sort)

if [ "$mode" != "jar" ]; then
  mapfile -t test_sources < <(find "$here/src/test/java" -name '*.java' | sort)
  javac --release 8 -Xlint:all -Werror -encoding UTF-8 -d "$out/classes" "${main_sources[@]}" "${test_sources[@]}"
  if [ "$mode" = "compile-tests" ]; then
    exit 0
  fi
  exec java -cp "$out/classes" org.harvest.hdfs.ShimTests "${test_args[@]}"
fi

if [ -z "$classpath" ]; then
  if ! command -v hadoop >/dev/null 2>&1; then
    echo "build.sh: no 'hadoop' command on PATH; pass --classpath with the Hadoop jars" >&2
    exit 2
  fi
  classpath="$(hadoop classpath)"
fi
javac --release 8 -Xlint:all,-path -encoding UTF-8 -cp "$classpath" -d "$out/classes" "${main_sources[@]}"
jar cf "$out/harvest-hdfs-shim.jar" -C "$out/classes" org/harvest
echo "$out/harvest-hdfs-shim.jar"
