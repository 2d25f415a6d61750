"""A judged knowledge graph: forty entities of an online shop's engineering notes (a third of them in
Spanish, with accents), queries whose answer is known, and off-topic queries that share ordinary words
with the graph but ask about something else. Used to choose and check the graph's relevance floor
(docs/graph.md, tests/unit/graph/test_judged_relevance.py)."""

from __future__ import annotations

# (name, type, observations)
ENTITIES: list[tuple[str, str, list[str]]] = [
    (
        "Catálogo de productos",
        "Componente",
        ["Migración del catálogo a PostgreSQL completada en marzo", "El catálogo sirve 12.000 artículos con fotos"],
    ),
    (
        "Pasarela de pagos",
        "Sistema",
        ["Integración con Stripe para tarjetas", "Los reembolsos tardan cinco días hábiles"],
    ),
    (
        "Sesión 2026-11-03",
        "Sesion",
        ["Revisamos la caída del servidor de búsqueda", "Decidimos añadir réplicas de lectura"],
    ),
    ("Nolan", "Persona", ["Desarrollador principal del proyecto", "Prefiere Python y revisiones de código breves"]),
    ("Sofía", "Agente", ["Asistente que escribe reflexiones sobre cada sesión", "Resume las decisiones de la semana"]),
    (
        "Auth Service",
        "Component",
        ["Issues JWT access tokens valid for 15 minutes", "Refresh tokens rotate on every use"],
    ),
    (
        "Nightly Backup",
        "Job",
        ["pg_dump runs at 02:00 UTC and uploads to the backups bucket", "Failed twice in October: the disk was full"],
    ),
    (
        "TLS Certificates",
        "Ops",
        ["Renewed by certbot every 60 days", "A wildcard certificate covers the internal hosts"],
    ),
    (
        "Deploy Pipeline",
        "System",
        ["A merge to main triggers build, tests and a canary release", "Rolls back on its own when errors exceed 2%"],
    ),
    (
        "Rate Limiter",
        "Component",
        ["Token bucket of 100 requests per minute per API key", "Answers 429 with Retry-After"],
    ),
    (
        "Search Index",
        "Component",
        ["Elasticsearch cluster of three nodes", "Reindexing every product takes four hours"],
    ),
    ("Email Notifications", "Component", ["Sent through Amazon SES", "The bounce rate must stay under 5%"]),
    ("Mobile App", "Product", ["React Native app for iOS and Android", "Push notifications through Firebase"]),
    (
        "Data Warehouse",
        "System",
        ["BigQuery dataset refreshed hourly from the orders database", "Analysts build sales dashboards there"],
    ),
    ("Inventory Service", "Component", ["Tracks stock levels per warehouse", "Holds items for 15 minutes at checkout"]),
    ("Checkout Flow", "Feature", ["Three steps: cart, shipping address, payment", "Abandoned carts get a reminder"]),
    ("Customer Support Desk", "Team", ["Uses Zendesk for tickets", "Open weekdays from 9 to 18, Madrid time"]),
    ("Kubernetes Cluster", "Infrastructure", ["GKE in europe-west1 with autoscaling node pools", "Ingress by nginx"]),
    ("Redis Cache", "Component", ["Caches product pages for five minutes", "Eviction policy allkeys-lru"]),
    ("Logging Stack", "Infrastructure", ["Loki and Grafana keep logs for 30 days", "Alerts are routed to PagerDuty"]),
    (
        "Facturación electrónica",
        "Componente",
        ["Genera facturas en XML para la agencia tributaria", "Numeración correlativa por serie y año"],
    ),
    ("Traducciones", "Componente", ["Textos de la tienda en español, inglés y portugués", "Se gestionan en Crowdin"]),
    (
        "Almacén de Valencia",
        "Lugar",
        ["Centro logístico principal: envíos en 24 horas a la península", "Inventario físico cada trimestre"],
    ),
    (
        "Política de devoluciones",
        "Documento",
        ["Los clientes tienen 30 días para devolver un pedido", "El envío de la devolución es gratuito"],
    ),
    (
        "Reunión de planificación trimestral",
        "Evento",
        ["Se celebra el primer martes de cada trimestre", "Allí se fijan los objetivos de ingresos"],
    ),
    ("Optimización de imágenes", "Tarea", ["Convertir las fotos de producto a WebP", "Portada más rápida en móvil"]),
    (
        "Accesibilidad",
        "Requisito",
        ["La web cumple WCAG 2.1 nivel AA", "Contraste suficiente y navegación por teclado"],
    ),
    (
        "Programa de fidelización",
        "Producto",
        ["Puntos por cada compra, canjeables por descuentos", "Niveles bronce, plata y oro"],
    ),
    ("Feature Flags", "Tool", ["LaunchDarkly controls gradual rollouts", "Flags older than 90 days are removed"]),
    (
        "GDPR Compliance",
        "Requirement",
        ["Personal data is erased within 30 days of a request", "A DPA is signed with every processor"],
    ),
    ("On-call Rotation", "Process", ["Weekly rotation among five engineers", "Handover every Monday at 10:00"]),
    ("Load Testing", "Task", ["k6 scripts replay Black Friday traffic", "The checkout held 800 requests per second"]),
    (
        "Recommendation Engine",
        "Component",
        ["Suggests related products from purchase history", "Collaborative filtering model retrained weekly"],
    ),
    ("Shipping Carriers", "Integration", ["SEUR and Correos labels made through their APIs", "Tracking synced hourly"]),
    ("Price Rules", "Component", ["Discounts, coupons and bundle prices", "Rules are applied in priority order"]),
    (
        "Image CDN",
        "Infrastructure",
        ["Cloudflare serves product images", "Its cache is purged on every catalogue change"],
    ),
    ("Error Budget", "SRE", ["99.9% availability target per month", "Allows 43 minutes of downtime a month"]),
    (
        "Seguridad de contraseñas",
        "Requisito",
        ["Las contraseñas se guardan con Argon2", "Bloqueo tras cinco intentos fallidos"],
    ),
    ("Marketing Newsletter", "Campaign", ["Sent every Thursday to 40,000 subscribers", "Open rate around 28%"]),
    (
        "Database Replicas",
        "Infrastructure",
        ["Two read replicas of the primary", "Replication lag alert at 30 seconds"],
    ),
]

# (query, the entity that answers it)
JUDGED: list[tuple[str, str]] = [
    ("migración catálogo", "Catálogo de productos"),
    ("migracion catalogo", "Catálogo de productos"),
    ("how long are access tokens valid", "Auth Service"),
    ("why did the nightly backup fail", "Nightly Backup"),
    ("¿cuántos días tienen los clientes para devolver un pedido?", "Política de devoluciones"),
    ("factura electrónica XML", "Facturación electrónica"),
    ("what happens when errors rise during a release", "Deploy Pipeline"),
    ("how many requests per minute can one API key make", "Rate Limiter"),
    ("almacén con envíos en 24 horas", "Almacén de Valencia"),
    ("certificate renewal", "TLS Certificates"),
    ("contraseñas Argon2", "Seguridad de contraseñas"),
    ("contrasenas argon2", "Seguridad de contraseñas"),
    ("who answers customer tickets", "Customer Support Desk"),
    ("how is personal data erased", "GDPR Compliance"),
]

# Pairs of JUDGED queries that differ only by accents: both must find the same entity first.
ACCENT_PAIRS: list[tuple[str, str]] = [
    ("migración catálogo", "migracion catalogo"),
    ("contraseñas Argon2", "contrasenas argon2"),
]

# About something else, each sharing an ordinary word or two with the graph ("with", "the", "weekly",
# "price", "stock", "days", "de", "first", ...), and one of letters only.
OFF_TOPIC: list[str] = [
    "best recipe for banana bread with walnuts",
    "xq zvbnm plorf",
    "weekly yoga class schedule",
    "Tuesday piano lessons for kids",
    "the price of gold on the stock market today",
    "how many days until the football world cup",
    "receta de paella con mariscos y arroz",
    "first aid for a bee sting",
]
