#!/usr/bin/env bash
# The main job: ResNet (tiny preset) under half its unmanaged peak with the lru policy, with its report.
set -euo pipefail
cd "$(dirname "$0")/.."
build/vtensor train --model resnet-tiny --iters 20 --budget 1832KiB --policy lru --report resnet-tiny.report.json
