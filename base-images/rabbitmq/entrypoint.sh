#!/bin/sh
# Debian's rabbitmq-server does not read RABBITMQ_DEFAULT_USER/PASS as the
# official image does: write them into rabbitmq.conf before the node starts.
# The user is created on the node's first start only (as in the official image).
set -eu
{
  echo "listeners.tcp.default = 5672"
  echo "management.tcp.port = 15672"
  echo "loopback_users = none"
  echo "log.console = true"
  echo "log.file = false"
  if [ -n "${RABBITMQ_DEFAULT_USER:-}" ]; then
    echo "default_user = ${RABBITMQ_DEFAULT_USER}"
    echo "default_pass = ${RABBITMQ_DEFAULT_PASS:-}"
  fi
} > /etc/rabbitmq/rabbitmq.conf
exec "$@"
