"""Serving: WSGI routes, the application factory, gunicorn configuration and worker."""
