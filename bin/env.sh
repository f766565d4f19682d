# Sourced by bin/* scripts: exports config/airflow.env (values already in the environment win),
# and a JWT secret generated once per checkout (Airflow warns on short keys; never committed).
REPO="${REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
if [ ! -x "$REPO/.venv/bin/airflow" ]; then
  echo "The project environment is not installed yet: run 'make install' (or 'make demo' / 'make test')." >&2
  exit 1
fi
while IFS='=' read -r key value; do
  case "$key" in ''|\#*) continue ;; esac
  if [ -z "${!key+x}" ]; then export "$key=${value//\$\{REPO\}/$REPO}"; fi
done < "$REPO/config/airflow.env"
mkdir -p "$AIRFLOW_HOME"
# OpenLineage events of every task (datamind_airflow/lineage.py) into a file beside the tables they name; a
# deployment sets AIRFLOW__OPENLINEAGE__TRANSPORT to its Marquez / OpenLineage backend instead.
if [ -z "${AIRFLOW__OPENLINEAGE__TRANSPORT:-}" ] && [[ "$DATAMIND_DATA_ROOT" != *://* ]]; then
  mkdir -p "$DATAMIND_DATA_ROOT/lineage"
  export AIRFLOW__OPENLINEAGE__TRANSPORT="{\"type\": \"file\", \"log_file_path\": \"$DATAMIND_DATA_ROOT/lineage/events.jsonl\", \"append\": true}"
  export AIRFLOW__OPENLINEAGE__NAMESPACE="${AIRFLOW__OPENLINEAGE__NAMESPACE:-datamind}"
fi
if [ -z "${AIRFLOW__API_AUTH__JWT_SECRET:-}" ]; then
  secret_file="$AIRFLOW_HOME/.jwt_secret"
  [ -s "$secret_file" ] || (umask 077; "$REPO/.venv/bin/python" -c 'import secrets; print(secrets.token_hex(48))' > "$secret_file")
  export AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$secret_file")"
fi
export PATH="$REPO/.venv/bin:$PATH"
