APP_NAME={{APP_NAME}}
DATABASE_URL=postgres://{{DB_USER}}:{{DB_PASSWORD}}@{{DB_HOST:-localhost}}:{{DB_PORT:-5432}}/{{DB_NAME}}
GREETING={{GREETING:-Hello & welcome}}
# literal braces for the app's own templating: \{{user}}
