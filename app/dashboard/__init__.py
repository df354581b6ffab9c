"""The dashboard page, its script and styles: static files served by app/routes/dashboard.py."""
