server {
    listen {{PORT:-8080}};
    server_name {{SERVER_NAME}};
    root {{DOC_ROOT:-/var/www/html}};

    location /api/ {
        proxy_pass {{UPSTREAM_URL}};
    }
}
