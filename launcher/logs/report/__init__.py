"""``mslaunch report``: page.py writes the page, charts.py draws its plots, story.py tells its timeline in words."""
