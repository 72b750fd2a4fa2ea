# MLflow tracking server with the PostgreSQL driver and the S3 client for MinIO.
FROM python:3.11-slim
RUN pip install --no-cache-dir mlflow==3.17.2 psycopg2-binary==2.9.13 boto3
USER nobody
EXPOSE 5000
