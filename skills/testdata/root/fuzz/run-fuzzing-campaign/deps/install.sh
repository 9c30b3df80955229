#!/usr/bin/env bash
echo "generic installer (stub): deps/fuzz/install.sh wins"
